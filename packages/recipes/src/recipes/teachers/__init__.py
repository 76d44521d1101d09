"""Teacher engines behind `recipes.teachers.protocol.TeacherEngine`: the native scorer and a vLLM server."""
