// k8scheck evaluates deploy/ objects with Kubernetes' own code (v0.36.3 libraries),
// for tests/deploy/test_k8s_real.py:
//
//	k8scheck cel < cases.json         DRA CEL selectors, as the scheduler evaluates them
//	k8scheck vap POLICY.yaml < cases.json   a ValidatingAdmissionPolicy, as the API server does
//
// Input and output are JSON arrays, one result per case, in order.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"sigs.k8s.io/yaml"
)

type celCase struct {
	Expr   string             `json:"expr"`
	Driver string             `json:"driver"`
	Device resourceapi.Device `json:"device"`
}

type celResult struct {
	Value        *bool  `json:"value,omitempty"`
	Error        string `json:"error,omitempty"`
	CompileError string `json:"compileError,omitempty"`
}

func runCEL() any {
	var cases []celCase
	must(json.NewDecoder(os.Stdin).Decode(&cases))
	compiler := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true})
	out := []celResult{}
	for _, c := range cases {
		compiled := compiler.CompileCELExpression(c.Expr, dracel.Options{})
		if compiled.Error != nil {
			out = append(out, celResult{CompileError: compiled.Error.Error()})
			continue
		}
		ok, _, err := compiled.DeviceMatches(context.Background(), dracel.Device{
			Driver:                   c.Driver,
			Attributes:               c.Device.Attributes,
			Capacity:                 c.Device.Capacity,
			AllowMultipleAllocations: c.Device.AllowMultipleAllocations,
		})
		if err != nil {
			out = append(out, celResult{Error: err.Error()})
			continue
		}
		out = append(out, celResult{Value: &ok})
	}
	return out
}

type vapCase struct {
	User      string              `json:"user"`
	Extra     map[string][]string `json:"extra"`
	Operation string              `json:"operation"`
	Object    map[string]any      `json:"object"`
	OldObject map[string]any      `json:"oldObject"`
}

type vapResult struct {
	Allowed  bool     `json:"allowed"`
	Messages []string `json:"messages"`
}

// compile follows compilePolicy of k8s.io/apiserver's validating admission policy plugin.
func compile(policy *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	envSet := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	compiler, err := cel.NewCompositedCompiler(envSet)
	must(err)
	opts := cel.OptionalVariableDeclarations{HasAuthorizer: true}
	var variables []cel.NamedExpressionAccessor
	for _, v := range policy.Spec.Variables {
		variables = append(variables, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	compiler.CompileAndStoreVariables(variables, opts, environment.StoredExpressions)
	var conditions []cel.ExpressionAccessor
	for i := range policy.Spec.MatchConditions {
		conditions = append(conditions, (*matchconditions.MatchCondition)(&policy.Spec.MatchConditions[i]))
	}
	matcher := matchconditions.NewMatcher(
		compiler.CompileCondition(conditions, opts, environment.StoredExpressions),
		policy.Spec.FailurePolicy, "policy", "validate", policy.Name)
	var validations, messages []cel.ExpressionAccessor
	for _, v := range policy.Spec.Validations {
		validations = append(validations, &validating.ValidationCondition{Expression: v.Expression, Message: v.Message})
		if v.MessageExpression != "" {
			messages = append(messages, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression})
		} else {
			messages = append(messages, nil)
		}
	}
	validationFilter := compiler.CompileCondition(validations, opts, environment.StoredExpressions)
	messageFilter := compiler.CompileCondition(messages, cel.OptionalVariableDeclarations{}, environment.StoredExpressions)
	for _, filter := range []cel.ConditionEvaluator{validationFilter, messageFilter} {
		if errs := filter.CompilationErrors(); len(errs) > 0 {
			fail(fmt.Errorf("policy %s does not compile: %v", policy.Name, errs))
		}
	}
	audit := compiler.CompileCondition(nil, opts, environment.StoredExpressions)
	return validating.NewValidator(validationFilter, matcher, audit, messageFilter, policy.Spec.FailurePolicy, nil)
}

func runVAP(path string) any {
	data, err := os.ReadFile(path)
	must(err)
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var probe struct{ Kind string }
		must(yaml.Unmarshal([]byte(doc), &probe))
		if probe.Kind == "ValidatingAdmissionPolicy" {
			policy = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			must(yaml.Unmarshal([]byte(doc), policy))
		}
	}
	if policy == nil {
		fail(fmt.Errorf("%s has no ValidatingAdmissionPolicy", path))
	}
	validator := compile(policy)
	var cases []vapCase
	must(json.NewDecoder(os.Stdin).Decode(&cases))
	gvk := schema.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceSlice"}
	gvr := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}
	out := []vapResult{}
	for _, c := range cases {
		var obj, old runtime.Object
		name := ""
		if c.Object != nil {
			u := &unstructured.Unstructured{Object: c.Object}
			obj, name = u, u.GetName()
		}
		if c.OldObject != nil {
			u := &unstructured.Unstructured{Object: c.OldObject}
			old, name = u, u.GetName()
		}
		info := &user.DefaultInfo{Name: c.User, Extra: c.Extra}
		attr := admission.NewAttributesRecord(obj, old, gvk, "", name, gvr, "",
			admission.Operation(c.Operation), nil, false, info)
		versioned := &admission.VersionedAttributes{
			Attributes: attr, VersionedKind: gvk, VersionedObject: obj, VersionedOldObject: old}
		result := validator.Validate(context.Background(), gvr, versioned, nil, nil, 10_000_000, nil)
		r := vapResult{Allowed: true, Messages: []string{}}
		for _, d := range result.Decisions {
			if d.Action != validating.ActionAdmit {
				r.Allowed = false
				r.Messages = append(r.Messages, d.Message)
			}
		}
		out = append(out, r)
	}
	return out
}

func must(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "k8scheck:", err)
	os.Exit(2)
}

func main() {
	var out any
	switch {
	case len(os.Args) == 2 && os.Args[1] == "cel":
		out = runCEL()
	case len(os.Args) == 3 && os.Args[1] == "vap":
		out = runVAP(os.Args[2])
	default:
		fail(fmt.Errorf("usage: k8scheck cel | k8scheck vap POLICY.yaml (cases on stdin)"))
	}
	must(json.NewEncoder(os.Stdout).Encode(out))
}
