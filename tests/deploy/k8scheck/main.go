// k8scheck evaluates deploy/ objects with Kubernetes' own code (v0.36.3 libraries),
// for tests/deploy/test_k8s_real.py:
//
//	k8scheck cel < cases.json         DRA CEL selectors, as the scheduler evaluates them
//	k8scheck vap [1.33] POLICY.yaml < cases.json   the ValidatingAdmissionPolicies of a file, as
//	                                               the API server does (compiled for new expressions,
//	                                               optionally in an older version's CEL environment)
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
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
	// Objects as JSON: numbers become int64 or float64 as in the API server
	// (k8s.io/apimachinery/pkg/util/json), not all float64.
	Object    json.RawMessage `json:"object"`
	OldObject json.RawMessage `json:"oldObject"`
	// The resource the request is for; ResourceSlice (resource.k8s.io/v1) when empty.
	Kind      string `json:"kind"`
	Resource  string `json:"resource"`
	Namespace string `json:"namespace"`
	// Policies with a paramKind are evaluated once per object here (as a binding with
	// a paramRef selector does) and allow when there is none.
	Params []json.RawMessage `json:"params"`
	// Only the policy of this name; every policy of the file when empty.
	Policy string `json:"policy"`
}

type vapResult struct {
	Allowed  bool     `json:"allowed"`
	Messages []string `json:"messages"`
	// Decisions that come from an evaluation error (compile, runtime, cost), whatever
	// the failure policy made of them.
	Errors []string `json:"errors"`
	// CEL cost of the validations and of the message expressions, summed over the
	// policies and their params, as the API server counts it against its budget.
	Cost int64 `json:"cost"`
}

type compiled struct {
	policy    *admissionregistrationv1.ValidatingAdmissionPolicy
	validator validating.Validator
	filters   []cel.ConditionEvaluator // validations, then message expressions
}

// compile follows compilePolicy of k8s.io/apiserver's validating admission policy plugin.
// envType NewExpressions is what the API server uses for a policy it has not stored yet.
func compile(policy *admissionregistrationv1.ValidatingAdmissionPolicy, compat *version.Version, envType environment.Type) compiled {
	envSet := environment.MustBaseEnvSet(compat)
	compiler, err := cel.NewCompositedCompiler(envSet)
	must(err)
	opts := cel.OptionalVariableDeclarations{HasAuthorizer: true, HasParams: policy.Spec.ParamKind != nil}
	var variables []cel.NamedExpressionAccessor
	for _, v := range policy.Spec.Variables {
		variables = append(variables, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	for _, v := range variables {
		// The API server refuses a policy whose variable does not compile; the
		// validator would only report it when a validation reads the variable.
		if result := compiler.CompileAndStoreVariable(v, opts, envType); result.Error != nil {
			fail(fmt.Errorf("policy %s: variable %s does not compile: %v", policy.Name, v.GetName(), result.Error))
		}
	}
	var conditions []cel.ExpressionAccessor
	for i := range policy.Spec.MatchConditions {
		conditions = append(conditions, (*matchconditions.MatchCondition)(&policy.Spec.MatchConditions[i]))
	}
	matcher := matchconditions.NewMatcher(
		compiler.CompileCondition(conditions, opts, envType),
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
	validationFilter := compiler.CompileCondition(validations, opts, envType)
	messageFilter := compiler.CompileCondition(messages, cel.OptionalVariableDeclarations{HasParams: opts.HasParams}, envType)
	for _, filter := range []cel.ConditionEvaluator{validationFilter, messageFilter} {
		if errs := filter.CompilationErrors(); len(errs) > 0 {
			fail(fmt.Errorf("policy %s does not compile: %v", policy.Name, errs))
		}
	}
	audit := compiler.CompileCondition(nil, opts, envType)
	return compiled{
		policy:    policy,
		validator: validating.NewValidator(validationFilter, matcher, audit, messageFilter, policy.Spec.FailurePolicy, nil),
		filters:   []cel.ConditionEvaluator{validationFilter, messageFilter},
	}
}

func loadPolicies(path string) []*admissionregistrationv1.ValidatingAdmissionPolicy {
	data, err := os.ReadFile(path)
	must(err)
	var policies []*admissionregistrationv1.ValidatingAdmissionPolicy
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var probe struct{ Kind string }
		must(yaml.Unmarshal([]byte(doc), &probe))
		if probe.Kind == "ValidatingAdmissionPolicy" {
			policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			must(yaml.UnmarshalStrict([]byte(doc), policy))
			policies = append(policies, policy)
		}
	}
	if len(policies) == 0 {
		fail(fmt.Errorf("%s has no ValidatingAdmissionPolicy", path))
	}
	return policies
}

// compat parses the -compat flag ("1.33"): the API server version whose CEL environment
// new expressions must compile in (a 1.34 server accepts what 1.33 knew).
func compatVersion(flag string) *version.Version {
	if flag == "" {
		return environment.DefaultCompatibilityVersion()
	}
	v, err := version.ParseMajorMinor(flag)
	must(err)
	return v
}

func runVAP(path string, compat *version.Version) any {
	var policies []compiled
	for _, p := range loadPolicies(path) {
		policies = append(policies, compile(p, compat, environment.NewExpressions))
	}
	var cases []vapCase
	must(json.NewDecoder(os.Stdin).Decode(&cases))
	out := []vapResult{}
	for _, c := range cases {
		r := vapResult{Allowed: true, Messages: []string{}, Errors: []string{}}
		for _, p := range policies {
			if c.Policy != "" && c.Policy != p.policy.Name {
				continue
			}
			var params []runtime.Object
			if p.policy.Spec.ParamKind != nil {
				for _, raw := range c.Params {
					params = append(params, &unstructured.Unstructured{Object: decodeObject(raw)})
				}
			} else {
				params = []runtime.Object{nil}
			}
			for _, param := range params {
				evaluate(p, c, param, &r)
			}
		}
		out = append(out, r)
	}
	return out
}

func evaluate(p compiled, c vapCase, param runtime.Object, r *vapResult) {
	kind, resource := c.Kind, c.Resource
	if kind == "" {
		kind, resource = "ResourceSlice", "resourceslices"
	}
	gvk := schema.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: kind}
	gvr := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: resource}
	var obj, old runtime.Object
	name := ""
	if o := decodeObject(c.Object); o != nil {
		u := &unstructured.Unstructured{Object: o}
		obj, name = u, u.GetName()
	}
	if o := decodeObject(c.OldObject); o != nil {
		u := &unstructured.Unstructured{Object: o}
		old, name = u, u.GetName()
	}
	info := &user.DefaultInfo{Name: c.User, Extra: c.Extra}
	attr := admission.NewAttributesRecord(obj, old, gvk, c.Namespace, name, gvr, "",
		admission.Operation(c.Operation), nil, false, info)
	versioned := &admission.VersionedAttributes{
		Attributes: attr, VersionedKind: gvk, VersionedObject: obj, VersionedOldObject: old}
	result := p.validator.Validate(context.Background(), gvr, versioned, param, nil, celconfig.RuntimeCELCostBudget, nil)
	for _, d := range result.Decisions {
		if d.Evaluation == validating.EvalError {
			r.Errors = append(r.Errors, d.Message)
		}
		if d.Action != validating.ActionAdmit {
			r.Allowed = false
			r.Messages = append(r.Messages, d.Message)
		}
	}
	if len(result.Decisions) == 0 {
		return // the match conditions left the object alone: no validation ran
	}
	// The cost, measured the way the validator spends its budget (match conditions
	// have a budget of their own and are not counted).
	request := cel.CreateAdmissionRequest(attr, metav1.GroupVersionResource(gvr), metav1.GroupVersionKind(gvk))
	vars := cel.OptionalVariableBindings{VersionedParams: param}
	for _, filter := range p.filters {
		_, remaining, err := filter.ForInput(context.Background(), versioned, request, vars, nil, celconfig.RuntimeCELCostBudget)
		if err != nil {
			r.Errors = append(r.Errors, err.Error())
			continue
		}
		r.Cost += celconfig.RuntimeCELCostBudget - remaining
	}
}

// decodeObject decodes a JSON object the way the API server's unstructured code does; nil
// for a missing or null one.
func decodeObject(raw json.RawMessage) map[string]any {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var out map[string]any
	must(utiljson.Unmarshal(raw, &out))
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
		out = runVAP(os.Args[2], compatVersion(""))
	case len(os.Args) == 4 && os.Args[1] == "vap":
		out = runVAP(os.Args[3], compatVersion(os.Args[2]))
	default:
		fail(fmt.Errorf("usage: k8scheck cel | k8scheck vap [COMPAT] POLICY.yaml (cases on stdin)"))
	}
	must(json.NewEncoder(os.Stdout).Encode(out))
}
