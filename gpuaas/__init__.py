"""gpuaas: the admin's tooling around the step image (render, route, demo, audit)."""
