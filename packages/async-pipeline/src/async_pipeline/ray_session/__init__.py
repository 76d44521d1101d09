"""The Ray session a run opens or attaches to (`async_pipeline.ray_session.session.RaySession`, its section
`async_pipeline.ray_session.config.RayConfig`), the node-aware actor base (`async_pipeline.ray_session.node`) and how
weights travel from the
trainer to engines (`async_pipeline.ray_session.weight_sync`: in process, or as numpy buckets through Ray's object
store).

Importing the package, or `async_pipeline.ray_session.config`, imports neither Ray nor torch."""
