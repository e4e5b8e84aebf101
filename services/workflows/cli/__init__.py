"""`agency workflow ...`, `agency send`, `agency peek`, `agency schedules`, and workflow replay."""
