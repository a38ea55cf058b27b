// Command argo-events-oracle answers, with Argo Events' own code (the module pinned in go.mod),
// what a Sensor does with a sequence of events: whether the controller accepts the Sensor
// (ValidateSensor), each dependency's filter verdict (dependencies.Filter), each trigger's
// dependency expression (the sensor's own translation of `conditions`), and what every trigger
// that fires would submit (triggers.ApplyTemplateParameters, FetchKubernetesResource,
// ApplyResourceParameters).
//
// gpuaas's differential tests feed it the cases they also give to the Python router (routing/),
// so every verdict the router prints is checked against the component it imitates.
//
// Protocol: one JSON case per stdin line, {"sensor": <Sensor>, "events": [<v1alpha1.Event>...]}
// (an event is {"context": {id, source, specversion, type, datacontenttype, subject, time},
// "data": <base64>}); one JSON result per stdout line, in order (see Result). Argo Events'
// own diagnostics (it prints some with fmt.Printf) go to stderr.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

func main() {
	// ResolveParamValue reports fallbacks with fmt.Printf: keep stdout for results only.
	results := os.Stdout
	os.Stdout = os.Stderr

	reader := bufio.NewReaderSize(os.Stdin, 1<<20)
	writer := bufio.NewWriterSize(results, 1<<20)
	defer writer.Flush()
	encoder := json.NewEncoder(writer)
	encoder.SetEscapeHTML(false)
	for {
		line, err := reader.ReadBytes('\n')
		if len(line) > 0 {
			if encodeErr := encoder.Encode(answer(line)); encodeErr != nil {
				fmt.Fprintf(os.Stderr, "argo-events-oracle: cannot encode a result: %v\n", encodeErr)
				os.Exit(1)
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "argo-events-oracle: reading stdin: %v\n", err)
			os.Exit(1)
		}
	}
}

// answer runs one case; a panic inside Argo Events' code is an answer too (the sensor pod would crash).
func answer(line []byte) (result Result) {
	defer func() {
		if recovered := recover(); recovered != nil {
			result = Result{Panic: fmt.Sprint(recovered)}
		}
	}()
	var c Case
	if err := json.Unmarshal(line, &c); err != nil {
		return Result{DecodeError: "case: " + err.Error()}
	}
	return simulate(c)
}
