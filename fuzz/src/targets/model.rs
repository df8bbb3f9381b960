//! The model file (worker::model): parsed from arbitrary bytes; a model that parses renders
//! (header and every non-zero weight) to a file that parses to the same model.
use linea_worker::model::Model;

pub fn run(data: &[u8]) {
    let Ok(model) = Model::parse(data, "fuzz.model") else { return };
    let entries: Vec<(&str, &str, f64)> = model
        .weights
        .iter()
        .flat_map(|(v, keys)| keys.iter().map(move |(k, &w)| (v.as_str(), k.as_str(), w)))
        .collect();
    let bytes = Model::render(&model.header, entries.iter().copied());
    let again = Model::parse(&bytes, "rendered.model").expect("a rendered model parses");
    assert_eq!(again.header, model.header);
    for &(variable, key, weight) in &entries {
        assert_eq!(
            again.weight(variable, key).to_bits(),
            if weight == 0.0 { 0f64.to_bits() } else { weight.to_bits() }
        );
    }
}
