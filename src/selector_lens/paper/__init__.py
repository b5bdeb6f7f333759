"""The paper's reproduction, built on the toolkit and imported by nothing below it: run presets
per scale, the plan, the studies and their verdicts, publishing, and the import of runs trained
by the paper's own code."""
