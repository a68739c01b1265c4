"""``python -m deltanode.config`` prints the table of keys (Markdown) that docs/configuration.md holds."""

from .markdown import keys_markdown

print(keys_markdown())
