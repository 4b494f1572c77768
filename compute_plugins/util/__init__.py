"""Small helpers every part uses: files, strict JSON, text from outside."""
