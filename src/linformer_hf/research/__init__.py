"""Research tooling: what the project uses to study its models (efficiency benchmark, replication of the paper,
attention spectrum, diagnostics). Not model API: users import models from `linformer_hf` itself."""
