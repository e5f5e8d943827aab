"""Repository tools that are not part of any installed package (run from the repository root)."""
