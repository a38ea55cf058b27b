"""`python -m sensors`: print every EventSource and Sensor as YAML (what `gpuaas render` writes)."""

import yaml

from sensors import all_event_sources, all_sensors

print("---\n".join(yaml.safe_dump(obj, sort_keys=False) for obj in [*all_event_sources(), *all_sensors()]), end="")
