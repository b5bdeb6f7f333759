"""mkdocs hooks: the CLI reference written from the commands themselves, and the published
τ-vs-D figure served beside the pages (it lives with the results, not in docs/)."""

from __future__ import annotations

from pathlib import Path

MARKER = "<!-- cli-reference -->"
FIGURE = Path("analyses/results/paper/tau_vs_d.svg")


def on_files(files, config, **kw):
    from mkdocs.structure.files import File

    if FIGURE.is_file():
        files.append(File.generated(config, "assets/tau_vs_d.svg", abs_src_path=str(FIGURE)))
    return files


def on_page_markdown(markdown, page, config, files, **kw):
    if MARKER not in markdown:
        return markdown
    import click
    import typer

    from selector_lens.cli import app

    root = typer.main.get_command(app)
    ctx = click.Context(root, info_name="selector-lens")
    parts = []
    for name in sorted(root.list_commands(ctx)):
        command = root.get_command(ctx, name)
        sub = click.Context(command, info_name=name, parent=ctx)
        formatter = click.HelpFormatter(width=100)
        for part in ("format_usage", "format_help_text", "format_options", "format_epilog"):
            getattr(click.Command, part)(command, sub, formatter)  # click's plain text, no rich
        parts.append(f"## {name}\n\n```text\n{formatter.getvalue().rstrip()}\n```\n")
    return markdown.replace(MARKER, "\n".join(parts))
