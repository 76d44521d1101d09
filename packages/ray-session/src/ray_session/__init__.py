"""The Ray session a run opens or attaches to (`ray_session.session.RaySession`, its section
`ray_session.config.RayConfig`), the node-aware actor base (`ray_session.node`) and how weights travel from the
trainer to engines (`ray_session.weight_sync`: in process, or as numpy buckets through Ray's object store).

Importing the package, or `ray_session.config`, imports neither Ray nor torch."""
