"""Workflow definitions: each capability is a pure core (`core.py`) and a thin Temporal shell."""
