"""A step's responses, the same in every LLM app: which prompts and sampling seeds a step draws (pure functions of
seed and step), generation on any rollout engine (the `rollout.engine` section and the `EngineSite` each engine is
built for), scoring into typed `ScoredSample`s, their quality metrics, the step batch the trainer takes, rollout
dumps and validation. Importing the package or its section modules is light: torch comes with the engines.
"""
