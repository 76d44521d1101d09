"""On-policy distillation's teacher: its sections (`teacher`, `teacher.engine`), the roster of teachers per data
source with the checks they must pass against the student, the teacher engines (the native scorer, a vLLM server),
the scoring call that routes each response to its teacher, and scoring streamed with rollout. The loss itself is
`trainers.algorithm` (kind `opd`).
"""
