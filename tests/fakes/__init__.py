"""Test doubles for the one service these machines cannot reach (the Anthropic API)."""
