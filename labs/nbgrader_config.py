"""nbgrader's configuration for the course's labs (run nbgrader from this folder: `make release`,
`make autograde`, `make feedback`; labs/README.md says when and why)."""

c = get_config()  # noqa: F821 (nbgrader provides get_config)

c.CourseDirectory.course_id = "vllm-throughput-tuning"
# a lab's run cell starts a vLLM server and runs a workload: minutes on a CPU, not nbgrader's
# default 30 s per cell (jupyter/nbgrader#1004: Execute.timeout is the setting that works)
c.Execute.timeout = 1200
# nbgrader gives a test cell 0 points for any output on stderr (nbgrader/utils.py
# determine_grade); the course's scoring functions send their own stderr to stdout, and this
# drops the warnings that libraries print on import or while a kernel starts
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"(INFO|WARNING|DEBUG) \d\d-\d\d|it/s\]|UserWarning|DeprecationWarning"
# what release/ and submitted/ never carry: a lab's results/ (its run writes them next to the
# notebook), stray .py files, caches
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "results",
                            "*.py"]
