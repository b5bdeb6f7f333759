"""The task wing: the selector task, its vocabulary, its dataset and evaluation set, batch order,
and what the paper's own code does differently (`task.paper`). Imports nothing above it."""
