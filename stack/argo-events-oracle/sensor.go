package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	_ "unsafe" // go:linkname

	"github.com/Knetic/govaluate"
	"go.uber.org/zap"

	"github.com/argoproj/argo-events/pkg/apis/events/v1alpha1"
	sensorreconciler "github.com/argoproj/argo-events/pkg/reconciler/sensor"
	"github.com/argoproj/argo-events/pkg/sensors"
	"github.com/argoproj/argo-events/pkg/sensors/dependencies"
	"github.com/argoproj/argo-events/pkg/sensors/triggers"
	"github.com/argoproj/argo-events/pkg/shared/logging"
)

// dependencyExpression is the sensor's own translation of a trigger's `conditions` (or of "all
// dependencies") into the expression its event-bus connection evaluates. It is unexported in
// pkg/sensors, so it is linked by name: the oracle must run this code, not a copy of it.
//
//go:linkname dependencyExpression github.com/argoproj/argo-events/pkg/sensors.(*SensorContext).getDependencyExpression
func dependencyExpression(sensorCtx *sensors.SensorContext, ctx context.Context, trigger v1alpha1.Trigger) (string, error)

// Case is one Sensor and the events that reach it, in order.
type Case struct {
	Sensor json.RawMessage   `json:"sensor"`
	Events []json.RawMessage `json:"events"`
}

// Result is what Argo Events makes of a Case.
type Result struct {
	DecodeError string          `json:"decodeError,omitempty"` // the Sensor or an event does not decode
	Invalid     string          `json:"invalid,omitempty"`     // ValidateSensor's error: the controller deploys nothing
	Triggers    []TriggerResult `json:"triggers"`
	Events      []EventResult   `json:"events"`
	Panic       string          `json:"panic,omitempty"`
}

// TriggerResult is a trigger's dependency expression as its goroutine in the sensor computes it.
type TriggerResult struct {
	Name         string   `json:"name"`
	Expression   string   `json:"expression"`
	Dependencies []string `json:"dependencies"` // the expression's variables, in order
	RequiresAnd  bool     `json:"requiresAnd"`
	Error        string   `json:"error,omitempty"` // the trigger goroutine logs this and returns: it never runs
}

// EventResult is one event's outcome: every subscribed dependency's filter verdict and every firing.
type EventResult struct {
	Filters []FilterVerdict `json:"filters"`
	Fired   []Firing        `json:"fired"`
}

// FilterVerdict is dependencies.Filter's answer for one dependency.
type FilterVerdict struct {
	Dependency string  `json:"dependency"`
	Pass       bool    `json:"pass"`
	Error      *string `json:"error"`
	Panic      string  `json:"panic,omitempty"` // Filter panicked: the sensor process would crash
}

// filter calls dependencies.Filter, turning a panic (which would crash the sensor) into an answer.
func filter(dep v1alpha1.EventDependency, event *v1alpha1.Event) (verdict FilterVerdict) {
	verdict.Dependency = dep.Name
	defer func() {
		if recovered := recover(); recovered != nil {
			verdict.Pass, verdict.Error, verdict.Panic = false, nil, fmt.Sprint(recovered)
		}
	}()
	pass, err := dependencies.Filter(event, dep.Filters, dep.FiltersLogicalOperator)
	verdict.Pass = pass
	if err != nil {
		message := err.Error()
		verdict.Error = &message
	}
	return verdict
}

// Firing is a trigger that fires, with the resource it would act on or the error that stops it.
type Firing struct {
	Trigger      string          `json:"trigger"`
	Dependency   string          `json:"dependency"` // whose event completed the conditions
	Dependencies []string        `json:"dependencies"`
	Resource     json.RawMessage `json:"resource,omitempty"`
	Stage        string          `json:"stage,omitempty"` // template-parameters | fetch | resource-parameters
	Error        string          `json:"error,omitempty"`
}

// The project's Sensors run on a JetStream EventBus.
var jetstreamBus = &v1alpha1.EventBus{Spec: v1alpha1.EventBusSpec{JetStream: &v1alpha1.JetStreamBus{}}}

func simulate(c Case) Result {
	result := Result{Triggers: []TriggerResult{}, Events: []EventResult{}}
	var sensor v1alpha1.Sensor
	if err := json.Unmarshal(c.Sensor, &sensor); err != nil {
		result.DecodeError = "sensor: " + err.Error()
		return result
	}
	events := make([]*v1alpha1.Event, 0, len(c.Events))
	for _, raw := range c.Events {
		event := &v1alpha1.Event{}
		if err := json.Unmarshal(raw, event); err != nil {
			result.DecodeError = "event: " + err.Error()
			return result
		}
		events = append(events, event)
	}
	if err := sensorreconciler.ValidateSensor(sensor.DeepCopy(), jetstreamBus); err != nil {
		result.Invalid = err.Error()
	}
	pod := podView(&sensor)
	ctx := logging.WithLogger(context.Background(), zap.NewNop().Sugar())
	sensorCtx := sensors.NewSensorContext(nil, nil, pod, nil, "", "", nil)
	connections := make([]*connection, 0, len(pod.Spec.Triggers))
	for _, trigger := range pod.Spec.Triggers {
		conn, summary := connect(ctx, sensorCtx, pod, trigger)
		result.Triggers = append(result.Triggers, summary)
		connections = append(connections, conn)
	}
	for _, event := range events {
		outcome := EventResult{Filters: []FilterVerdict{}, Fired: []Firing{}}
		for _, dep := range pod.Spec.Dependencies {
			if subscribed(dep, event) {
				outcome.Filters = append(outcome.Filters, filter(dep, event))
			}
		}
		if result.Invalid == "" {
			for _, conn := range connections {
				if conn != nil {
					outcome.Fired = append(outcome.Fired, conn.receive(event)...)
				}
			}
		}
		result.Events = append(result.Events, outcome)
	}
	return result
}

// podView is the Sensor as the sensor pod decodes it: the controller marshals its typed copy into
// the pod's environment, so fields that are empty and `omitempty` arrive absent.
func podView(sensor *v1alpha1.Sensor) *v1alpha1.Sensor {
	encoded, err := json.Marshal(sensor)
	if err != nil {
		panic(err)
	}
	pod := &v1alpha1.Sensor{}
	if err := json.Unmarshal(encoded, pod); err != nil {
		panic(err)
	}
	return pod
}

func subscribed(dep v1alpha1.EventDependency, event *v1alpha1.Event) bool {
	return event.Context != nil && dep.EventSourceName == event.Context.Source && dep.EventName == event.Context.Subject
}

// connection is one trigger's event-bus connection as the JetStream driver keeps it: the
// dependencies of its expression, the events remembered for `&&`, and the ids already processed.
type connection struct {
	sensor       *v1alpha1.Sensor
	trigger      v1alpha1.Trigger
	expression   *govaluate.EvaluableExpression
	requiresAnd  bool
	dependencies []v1alpha1.EventDependency
	saved        map[string]*v1alpha1.Event
	seen         map[string]bool
}

// connect mirrors the trigger goroutine of listenEvents up to the bus connection: translate the
// conditions, parse them with govaluate, and resolve every variable to a dependency.
func connect(ctx context.Context, sensorCtx *sensors.SensorContext, sensor *v1alpha1.Sensor, trigger v1alpha1.Trigger) (*connection, TriggerResult) {
	summary := TriggerResult{Dependencies: []string{}}
	if trigger.Template == nil {
		summary.Error = "trigger template can't be nil"
		return nil, summary
	}
	summary.Name = trigger.Template.Name
	expression, err := dependencyExpression(sensorCtx, ctx, trigger)
	summary.Expression = expression
	if err != nil {
		summary.Error = "failed to get dependency expression: " + err.Error()
		return nil, summary
	}
	evaluable, err := govaluate.NewEvaluableExpression(strings.ReplaceAll(expression, "-", "\\-"))
	if err != nil {
		summary.Error = "failed to get new evaluable expression: " + err.Error()
		return nil, summary
	}
	byName := make(map[string]v1alpha1.EventDependency, len(sensor.Spec.Dependencies))
	for _, dep := range sensor.Spec.Dependencies {
		byName[dep.Name] = dep
	}
	conn := &connection{sensor: sensor, trigger: trigger, expression: evaluable,
		requiresAnd: strings.Contains(expression, "&"), saved: map[string]*v1alpha1.Event{}, seen: map[string]bool{}}
	for _, name := range unique(evaluable.Vars()) {
		dep, ok := byName[name]
		if !ok {
			summary.Error = "Dependency expression and dependency list do not match, " + name + " is not found"
			return nil, summary
		}
		conn.dependencies = append(conn.dependencies, dep)
		summary.Dependencies = append(summary.Dependencies, name)
	}
	summary.RequiresAnd = conn.requiresAnd
	return conn, summary
}

func unique(names []string) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, name := range names {
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

// receive mirrors JetstreamTriggerConn.processMsg/processDependency for one event.
func (conn *connection) receive(event *v1alpha1.Event) []Firing {
	fired := []Firing{}
	if conn.seen[event.Context.ID] {
		return fired
	}
	matched := false
	for _, dep := range conn.dependencies {
		if !subscribed(dep, event) {
			continue
		}
		matched = true
		if !filter(dep, event).Pass {
			continue // a panic would crash and restart the sensor; the event is not delivered here
		}
		if !conn.requiresAnd {
			fired = append(fired, conn.fire(dep.Name, map[string]*v1alpha1.Event{dep.Name: event}))
			continue
		}
		parameters := make(map[string]interface{}, len(conn.dependencies))
		for _, d := range conn.dependencies {
			parameters[d.Name] = false
		}
		for name := range conn.saved {
			parameters[name] = true
		}
		parameters[dep.Name] = true
		value, err := conn.expression.Evaluate(parameters)
		if err != nil {
			continue // the sensor logs "failed to evaluate dependency expression"
		}
		if value == true {
			events := map[string]*v1alpha1.Event{dep.Name: event}
			for name, saved := range conn.saved {
				if name != dep.Name {
					events[name] = saved
				}
			}
			fired = append(fired, conn.fire(dep.Name, events))
			conn.saved = map[string]*v1alpha1.Event{}
		} else {
			conn.saved[dep.Name] = event
		}
	}
	if matched {
		conn.seen[event.Context.ID] = true
	}
	return fired
}

// fire mirrors triggerOne up to Execute: template parameters, the resource, resource parameters.
func (conn *connection) fire(dependency string, events map[string]*v1alpha1.Event) Firing {
	firing := Firing{Trigger: conn.trigger.Template.Name, Dependency: dependency,
		Dependencies: make([]string, 0, len(events))}
	for name := range events {
		firing.Dependencies = append(firing.Dependencies, name)
	}
	sort.Strings(firing.Dependencies)
	trigger := conn.trigger.DeepCopy()
	if err := triggers.ApplyTemplateParameters(events, trigger); err != nil {
		firing.Stage, firing.Error = "template-parameters", err.Error()
		return firing
	}
	var source *v1alpha1.ArtifactLocation
	var parameters []v1alpha1.TriggerParameter
	switch {
	case trigger.Template.ArgoWorkflow != nil:
		source, parameters = trigger.Template.ArgoWorkflow.Source, trigger.Template.ArgoWorkflow.Parameters
	case trigger.Template.K8s != nil:
		source, parameters = trigger.Template.K8s.Source, trigger.Template.K8s.Parameters
	default:
		return firing // other trigger types act on no Kubernetes resource
	}
	obj, err := triggers.FetchKubernetesResource(source)
	if err != nil {
		firing.Stage, firing.Error = "fetch", err.Error()
		return firing
	}
	if err := triggers.ApplyResourceParameters(events, parameters, obj); err != nil {
		firing.Stage, firing.Error = "resource-parameters", err.Error()
		return firing
	}
	encoded, err := obj.MarshalJSON()
	if err != nil {
		firing.Stage, firing.Error = "resource-parameters", err.Error()
		return firing
	}
	firing.Resource = encoded
	return firing
}
