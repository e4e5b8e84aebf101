"""The workflows service: workflow commands, the controller that drives members, schedules."""
