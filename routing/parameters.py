"""Trigger parameters, resolved as argo-events `pkg/sensors/triggers/params.go` resolves them.

For each parameter `{src: {dependencyName, dataKey|dataTemplate|contextKey|contextTemplate,
value, useRawData}, dest, operation}`:

* the dependency's event is missing (possible under `||` conditions): use `value`, else skip;
* no key and no template: `value` if given, else the WHOLE event JSON (`{"context": ...,
  "data": "<base64>"}`);
* a template is tried first (Go text/template + sprig over `{"Input": data}`; empty output or
  `<no value>` counts as failure), then the key (gjson; objects and arrays come back as raw
  JSON), then `value`; none resolving = the trigger fails;
* data keys need `datacontenttype: application/json` (YAML is converted);
* the value is written at `dest` (sjson) as a JSON string, or as raw JSON when `useRawData` is
  set and the value is not a plain string; `append`/`prepend` concatenate with the current
  value as strings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from routing.event import ArgoEvent
from routing.gjson import Document, GjsonPath, UnsupportedPath, compile_path
from routing.gotemplate import Template, TemplateError, TemplateUnsupported, parse_template
from routing.sjson import SjsonError, set_path

STRING = "String"


class ParameterError(ValueError):
    """A parameter could not be resolved or applied: the trigger fails."""


class ParameterNotEvaluated(ParameterError):
    """The parameter uses something gpuaas route does not evaluate: it cannot tell what is submitted."""


@dataclass
class TriggerParameter:
    index: int
    dependency: str
    data_key: str
    data_template: str
    context_key: str
    context_template: str
    default: str | None
    use_raw_data: bool
    dest: str
    operation: str
    _data_key_path: GjsonPath | None = None
    _context_key_path: GjsonPath | None = None
    _template: Template | None = None
    _compile_error: str | None = None
    _compile_unsupported: bool = False  # the key or template uses something gpuaas route does not evaluate

    @property
    def label(self) -> str:
        return f"parameter {self.index} (dest {self.dest or '<payload>'})"

    def resolve(self, events: dict[str, ArgoEvent]) -> tuple[str | None, str]:
        """(value, type) like ResolveParamValue; value None = skip this parameter."""
        event = events.get(self.dependency)
        if event is None:
            if self.default is not None:
                return self.default, STRING
            return None, STRING
        has_context = bool(self.context_key or self.context_template)
        has_data = bool(self.data_key or self.data_template)
        if not has_context and not has_data:
            if self.default is not None:
                return self.default, STRING
            return event.whole_event_json(), STRING
        problems: list[str] = []
        document: Document | None = None
        key_path: GjsonPath | None = None
        key_text, template_text = "", ""
        if has_context:
            key_text, template_text, key_path = self.context_key, self.context_template, self._context_key_path
            document = event.context_document
        if has_data:
            key_text, template_text, key_path = self.data_key, self.data_template, self._data_key_path
            document, error = _data_document(event)
            if document is None:
                if self.default is not None:
                    return self.default, STRING
                raise ParameterError(f"{self.label}: {error}")
        assert document is not None
        if template_text:
            try:
                if self._template is None:
                    if self._compile_unsupported:
                        raise TemplateUnsupported(self._compile_error or "not evaluated")
                    raise TemplateError(self._compile_error or "template does not parse")
                out = self._template.execute({"Input": document.value})
                if out in ("", "<no value>"):
                    raise TemplateError(f"template evaluated to empty string or no value: {template_text}")
                return out, STRING
            except TemplateUnsupported as exc:
                raise ParameterNotEvaluated(f"{self.label}: template {template_text!r}: {exc}") from None
            except TemplateError as exc:
                problems.append(f"template {template_text!r} failed: {exc}")
        if key_text:
            if key_path is None:
                if self._compile_unsupported:
                    raise ParameterNotEvaluated(f"{self.label}: {self._compile_error}")
                problems.append(self._compile_error or f"key {key_text!r} cannot be compiled")
            else:
                result = key_path.get(document)
                if result.exists():
                    kind = result.kind
                    if kind in ("JSON", "Null"):
                        return result.raw, kind
                    return result.string(), kind
                problems.append(f"key {key_text!r} does not exist in the event {'data' if has_data else 'context'}")
        if self.default is not None:
            return self.default, STRING
        raise ParameterError(
            f"{self.label}: unable to resolve a value from dependency {self.dependency!r}: " + "; ".join(problems)
            + " (no default `value` is set, so the trigger fails)"
        )


def _data_document(event: ArgoEvent) -> tuple[Document | None, str]:
    content_type = event.datacontenttype
    if content_type == "application/json":
        if event.data_is_json:
            return event.document, ""
        return None, "event data is not valid JSON"
    if content_type in ("application/yaml", "text/yaml"):
        import yaml

        # ghodss/yaml.YAMLToJSON: decode, then json.Marshal (map keys sorted, Go number spelling).
        # PyYAML stands in for go-yaml v2 here: scalars they resolve differently (1e+21 without a dot,
        # timestamps) are not guaranteed to match (docs/route.md).
        from routing.gofmt import go_json_marshal

        try:
            return Document(go_json_marshal(yaml.safe_load(event.data or ""))), ""
        except (yaml.YAMLError, TypeError) as exc:
            return None, f"failed converting yaml event data to JSON: {exc}"
    return None, f"unsupported event content type: {content_type}"


def compile_parameters(specs: list[dict[str, Any]] | None) -> list[TriggerParameter]:
    """Compile trigger parameters once; problems surface when the trigger fires."""
    params: list[TriggerParameter] = []
    for i, spec in enumerate(specs or []):
        src = spec.get("src") or {}
        default = src.get("value")
        param = TriggerParameter(
            index=i + 1,
            dependency=str(src.get("dependencyName", "")),
            data_key=str(src.get("dataKey") or ""),
            data_template=str(src.get("dataTemplate") or ""),
            context_key=str(src.get("contextKey") or ""),
            context_template=str(src.get("contextTemplate") or ""),
            default=None if default is None else str(default),
            use_raw_data=bool(src.get("useRawData")),
            dest=str(spec.get("dest") or ""),
            operation=str(spec.get("operation") or ""),
        )
        try:
            if param.data_key:
                param._data_key_path = compile_path(param.data_key)
            if param.context_key:
                param._context_key_path = compile_path(param.context_key)
            template_text = param.data_template if (param.data_key or param.data_template) else param.context_template
            if template_text:
                param._template = parse_template(template_text)
        except (UnsupportedPath, TemplateError) as exc:
            param._compile_error = str(exc)
            param._compile_unsupported = isinstance(exc, (UnsupportedPath, TemplateUnsupported))
        params.append(param)
    return params


def apply_parameters(document: Any, params: list[TriggerParameter], events: dict[str, ArgoEvent]) -> Any:
    """ApplyParams: resolve every parameter and write it at its dest. Raises ParameterError."""
    from routing.gjson import Document as _Doc
    from routing.gjson import go_json

    for param in params:
        value, kind = param.resolve(events)
        if value is None:
            continue
        if param.operation in ("append", "prepend"):
            current = _Doc(go_json(document)).get(param.dest) if param.dest else None
            if current is not None and current.exists():
                kind = STRING
                value = current.string() + value if param.operation == "append" else value + current.string()
        elif param.operation not in ("", "overwrite"):
            raise ParameterError(f"{param.label}: unsupported trigger parameter operation: {param.operation}")
        if not param.dest:
            raise ParameterError(f"{param.label}: dest is empty")
        if kind != STRING and param.use_raw_data:
            try:
                new_value: Any = json.loads(value)
            except ValueError:
                raise ParameterError(f"{param.label}: raw value is not valid JSON: {value[:80]!r}") from None
        else:
            new_value = value
        try:
            document = set_path(document, param.dest, new_value)
        except SjsonError as exc:
            raise ParameterError(f"{param.label}: {exc}") from None
    return document
