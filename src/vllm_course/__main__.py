from vllm_course.cli import main

main()
