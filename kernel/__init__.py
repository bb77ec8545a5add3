"""The kernel: what every app needs and that needs no app (errors, append-only models, failpoints, environment
helpers, the request's context and the domain's signals). It imports nothing of the project but the engine."""
