// Command apiserver-check runs the TrainingJob CRD and the fixtures through the API server's
// own code (k8s.io/apiextensions-apiserver), without etcd or a running server: CRD validation
// (structural schema, CEL compilation and cost estimates), then for every fixture strict
// unknown-field detection, pruning, defaulting, OpenAPI schema validation and the CEL rules
// (transition rules against the first document of an update fixture). It checks the headers
// described in ../fixtures/README.md and exits non-zero on any mismatch.
//
//	cd crds/tests/apiserver-check && go run . ../../trainingjob.crd.yaml ../fixtures
package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

type checker struct {
	s         *structuralschema.Structural
	validator apiservervalidation.SchemaValidator
	cel       *cel.Validator
}

func (c *checker) errors(obj, old map[string]interface{}, strict bool) []string {
	var out []string
	if strict {
		opts := structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}
		cp := deepCopy(obj)
		unknown := structuralpruning.PruneWithOptions(cp, c.s, true, opts)
		if len(unknown) > 0 {
			sort.Strings(unknown)
			for _, u := range unknown {
				out = append(out, fmt.Sprintf("strict decoding error: unknown field %q", u))
			}
			return out
		}
	}
	structuralpruning.Prune(obj, c.s, true)
	structuraldefaulting.Default(obj, c.s)
	if old != nil {
		structuralpruning.Prune(old, c.s, true)
		structuraldefaulting.Default(old, c.s)
	}
	var errs field.ErrorList
	if old == nil {
		errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, c.validator)...)
	} else {
		errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(nil, obj, old, c.validator)...)
	}
	var oldObj interface{}
	if old != nil {
		oldObj = old
	}
	celErrs, _ := c.cel.Validate(context.TODO(), nil, c.s, obj, oldObj, celconfig.RuntimeCELCostBudget)
	errs = append(errs, celErrs...)
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

func deepCopy(m map[string]interface{}) map[string]interface{} {
	b, _ := utiljson.Marshal(m)
	var out map[string]interface{}
	_ = utiljson.Unmarshal(b, &out)
	return out
}

func docs(path string) []map[string]interface{} {
	raw, err := os.ReadFile(path)
	must(err)
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var out []map[string]interface{}
	for {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		must(err)
		var m map[string]interface{}
		j, err := yaml.YAMLToJSON(doc)
		must(err)
		must(utiljson.Unmarshal(j, &m))
		if m != nil {
			out = append(out, m)
		}
	}
	return out
}

func header(path, key string) string {
	raw, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		if v, ok := strings.CutPrefix(l, "# "+key+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func main() {
	crdPath, fixtures := os.Args[1], os.Args[2]
	raw, err := os.ReadFile(crdPath)
	must(err)
	var v1 apiextensionsv1.CustomResourceDefinition
	must(yaml.UnmarshalStrict(raw, &v1))
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&v1)
	var crd apiextensions.CustomResourceDefinition
	must(apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1, &crd, nil))
	crdErrs := crdvalidation.ValidateCustomResourceDefinition(context.TODO(), &crd)
	fmt.Printf("CRD validation: %d error(s)\n", len(crdErrs))
	for _, e := range crdErrs {
		fmt.Println("  ", e.Error())
	}

	var schema *apiextensions.JSONSchemaProps
	if crd.Spec.Versions[0].Schema != nil {
		schema = crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	} else {
		schema = crd.Spec.Validation.OpenAPIV3Schema
	}
	s, err := structuralschema.NewStructural(schema)
	must(err)
	validator, _, err := apiservervalidation.NewSchemaValidator(schema)
	must(err)
	c := &checker{s: s, validator: validator, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}

	files, _ := filepath.Glob(filepath.Join(fixtures, "*.yaml"))
	sort.Strings(files)
	failures := 0
	for _, f := range files {
		ds := docs(f)
		name := filepath.Base(f)
		var obj, old map[string]interface{}
		if len(ds) == 2 {
			old, obj = ds[0], ds[1]
			if e := c.errors(deepCopy(old), nil, true); len(e) > 0 {
				fmt.Printf("FAIL %s: stored object refused: %v\n", name, e)
				failures++
			}
		} else {
			obj = ds[0]
		}
		for _, mode := range []struct {
			strict bool
			key    string
		}{{true, "expect"}, {false, "expect-pruned"}} {
			var oldCopy map[string]interface{}
			if old != nil {
				oldCopy = deepCopy(old)
			}
			errs := c.errors(deepCopy(obj), oldCopy, mode.strict)
			want := header(f, mode.key)
			invalid := strings.HasPrefix(name, "invalid-") || strings.HasPrefix(name, "update-invalid-")
			ok := true
			switch {
			case !invalid && len(errs) > 0:
				ok = false
			case invalid && mode.key == "expect" && !strings.Contains(strings.Join(errs, "\n"), want):
				ok = false
			case invalid && mode.key == "expect-pruned" && want != "" && !strings.Contains(strings.Join(errs, "\n"), want):
				ok = false
			}
			status := "ok  "
			if !ok {
				status = "FAIL"
				failures++
			}
			if mode.strict || want != "" || !ok {
				fmt.Printf("%s %s (strict=%v) want=%q\n", status, name, mode.strict, want)
				for _, e := range errs {
					fmt.Printf("       %s\n", e)
				}
			}
		}
	}
	fmt.Printf("%d fixture failure(s)\n", failures)
	if failures > 0 || len(crdErrs) > 0 {
		os.Exit(1)
	}
}
