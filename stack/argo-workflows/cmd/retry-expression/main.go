// Command retry-expression evaluates a retryStrategy.expression exactly as Argo Workflows' controller
// does when it decides whether to retry a node: the same scope (built like buildRetryStrategyLocalScope
// in workflow/controller/operator.go: lastRetry.exitCode is "-1" when the attempt has no exit code, as
// for a pod evicted or deleted before its main container terminated) and the same evaluator
// (util/expr/argoexpr.EvalBool over util/expr/env.GetFuncMap).
//
// Input on stdin: a JSON list of cases {"expression", "exitCode" (string or null), "status",
// "message", "duration", "retries"}. Output on stdout: a JSON list of {"retry": bool, "error": string}.
// gpuaas's tests use it to check the rendered WorkflowTemplates' retry expression (tests/artifacts).
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/argoproj/argo-workflows/v4/util/expr/argoexpr"
	"github.com/argoproj/argo-workflows/v4/util/expr/env"
)

type attempt struct {
	Expression string  `json:"expression"`
	ExitCode   *string `json:"exitCode"`
	Status     string  `json:"status"`
	Message    string  `json:"message"`
	Duration   string  `json:"duration"`
	Retries    string  `json:"retries"`
}

type verdict struct {
	Retry bool   `json:"retry"`
	Error string `json:"error,omitempty"`
}

func main() {
	var cases []attempt
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		fmt.Fprintf(os.Stderr, "retry-expression: stdin: expected a JSON list of cases: %v\n", err)
		os.Exit(2)
	}
	out := make([]verdict, 0, len(cases))
	for _, c := range cases {
		exitCode := "-1" // what the controller uses when the last child has no Outputs.ExitCode
		if c.ExitCode != nil {
			exitCode = *c.ExitCode
		}
		scope := map[string]interface{}{
			"retries":            c.Retries,
			"lastRetry.exitCode": exitCode,
			"lastRetry.status":   c.Status,
			"lastRetry.duration": c.Duration,
			"lastRetry.message":  c.Message,
		}
		retry, err := argoexpr.EvalBool(c.Expression, env.GetFuncMap(scope))
		v := verdict{Retry: retry}
		if err != nil {
			v.Error = err.Error()
		}
		out = append(out, v)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "retry-expression: %v\n", err)
		os.Exit(1)
	}
}
