use thiserror::Error;

/// Every way a reconcile can fail. The category labels the error metric; whether it is
/// permanent decides the retry ([`crate::reconcile::error_policy`]).
#[derive(Debug, Error)]
pub enum OperatorError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The finalizer helper refused the object itself (no name, an invalid finalizer); its
    /// API calls fail as [`OperatorError::Kube`].
    #[error("finalizer: {0}")]
    Finalizer(String),
    #[error("{0} has no {1}")]
    MissingField(String, &'static str),
    #[error("serializing {0}: {1}")]
    Serialize(&'static str, serde_json::Error),
    /// The operator's own configuration (flags, environment) is unusable: found at start-up,
    /// before anything is reconciled.
    #[error("configuration: {0}")]
    Config(String),
}

/// What an API server's answer means, whichever call it answered. One table for every call,
/// so the creation of a Secret, the apply of a Service and the status write cannot drift
/// apart in how they treat the same refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiClass {
    /// 400, 422: the object as sent can never be accepted; only a change of the job helps.
    Invalid,
    /// 403: RBAC, a ResourceQuota or an admission policy said no; it may say yes later.
    Refused,
    /// 409: the name is taken by an object that is not the job's, or the write was based on
    /// a version that changed meanwhile.
    Conflict,
    /// 404.
    NotFound,
    /// Anything else (5xx, 429, a timeout, a broken connection): the server or the network,
    /// for now.
    Transient,
}

pub fn classify(error: &kube::Error) -> ApiClass {
    match error {
        kube::Error::Api(status) => match status.code {
            400 | 422 => ApiClass::Invalid,
            403 => ApiClass::Refused,
            404 => ApiClass::NotFound,
            409 => ApiClass::Conflict,
            _ => ApiClass::Transient,
        },
        _ => ApiClass::Transient,
    }
}

/// The server's own words about a refusal, for conditions and events.
pub fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

impl OperatorError {
    /// Whether retrying cannot help until the job changes: an object the API server calls
    /// invalid, a stored object missing what every stored object has, or one that does not
    /// serialize. Everything else is retried with backoff.
    pub fn is_permanent(&self) -> bool {
        match self {
            OperatorError::Kube(e) => classify(e) == ApiClass::Invalid,
            OperatorError::Finalizer(_)
            | OperatorError::MissingField(..)
            | OperatorError::Serialize(..)
            | OperatorError::Config(_) => true,
        }
    }

    /// The metric label of the error.
    pub fn category(&self) -> &'static str {
        match self {
            OperatorError::Kube(e) => match classify(e) {
                ApiClass::Invalid => "invalid",
                ApiClass::Refused => "forbidden",
                ApiClass::Conflict => "conflict",
                ApiClass::NotFound => "not_found",
                ApiClass::Transient => "api",
            },
            OperatorError::Finalizer(_) => "finalizer",
            OperatorError::MissingField(..) => "object",
            OperatorError::Serialize(..) => "serialize",
            OperatorError::Config(_) => "config",
        }
    }
}

pub type Result<T, E = OperatorError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status::failure(&format!("refused with {code}"), "Test").with_code(code)))
    }

    #[test]
    fn every_answer_has_one_class_and_only_invalid_objects_wait_for_a_change() {
        let table = [
            (400, ApiClass::Invalid, "invalid", true),
            (422, ApiClass::Invalid, "invalid", true),
            (403, ApiClass::Refused, "forbidden", false),
            (404, ApiClass::NotFound, "not_found", false),
            (409, ApiClass::Conflict, "conflict", false),
            (429, ApiClass::Transient, "api", false),
            (500, ApiClass::Transient, "api", false),
            (503, ApiClass::Transient, "api", false),
        ];
        for (code, class, category, permanent) in table {
            let error = api(code);
            assert_eq!(classify(&error), class, "{code}");
            assert_eq!(api_message(&error), format!("refused with {code}"));
            let error = OperatorError::Kube(error);
            assert_eq!((error.category(), error.is_permanent()), (category, permanent), "{code}");
        }
        let io = kube::Error::ReadEvents(std::io::Error::other("connection reset"));
        assert_eq!(classify(&io), ApiClass::Transient);
        assert!(!OperatorError::Kube(io).is_permanent(), "the network is retried");
        assert!(OperatorError::Finalizer("object has no name".into()).is_permanent());
        assert!(OperatorError::MissingField("ads".into(), "namespace").is_permanent());
    }
}
