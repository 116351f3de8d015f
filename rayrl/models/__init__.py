"""Policies: loading one (policy), building the small demo model (demo), random models of real shapes
(random_qwen2), tokenizers, the learner's scoring head. Import the module you need: each pulls in only its own."""
