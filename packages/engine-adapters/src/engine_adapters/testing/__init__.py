"""Test doubles for the adapters: `fake_sglang.FakeSGLangServer`, an in-process server speaking SGLang's wire format
(SGLang does not run on the project's CPU machines), used by the adapter's tests and the apps' SGLang tests."""
