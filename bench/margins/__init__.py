"""The margins study: teacher-forced next-call decisions at three precisions (docs/margins.md)."""
