// Command olmcheck validates an OLM bundle directory with the Operator Framework's own
// validation library (github.com/operator-framework/api/pkg/validation): the default bundle
// validators plus the OperatorHub checks (OperatorHubV2Validator), the checks
// `operator-sdk bundle validate --select-optional suite=operatorframework` runs.
//
// Usage: olmcheck BUNDLE_DIR [K8S_VERSION]
//
// It prints one JSON object per finding ({"level": "error"|"warning", "type", "field",
// "detail", "validator"}) and exits 1 when any finding is an error, 2 when the bundle cannot
// be read.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
)

type finding struct {
	Level     string `json:"level"`
	Type      string `json:"type"`
	Field     string `json:"field"`
	Detail    string `json:"detail"`
	Validator string `json:"validator"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: olmcheck BUNDLE_DIR [K8S_VERSION]")
		os.Exit(2)
	}
	bundle, err := manifests.GetBundleFromDir(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "olmcheck: cannot read bundle %s: %v\n", os.Args[1], err)
		os.Exit(2)
	}
	k8sVersion := "1.33"
	if len(os.Args) > 2 {
		k8sVersion = os.Args[2]
	}
	objects := bundle.ObjectsToValidate()
	validators := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCapabilitiesValidator,
		validation.StandardCategoriesValidator,
	)
	objects = append(objects, map[string]string{"k8s-version": k8sVersion})
	results := validators.Validate(objects...)
	failed := false
	out := json.NewEncoder(os.Stdout)
	for _, result := range results {
		for _, e := range result.Errors {
			failed = true
			emit(out, "error", e, result.Name)
		}
		for _, w := range result.Warnings {
			emit(out, "warning", w, result.Name)
		}
	}
	if failed {
		os.Exit(1)
	}
}

func emit(out *json.Encoder, level string, e errors.Error, name string) {
	_ = out.Encode(finding{Level: level, Type: string(e.Type), Field: e.Field, Detail: e.Error(), Validator: name})
}
