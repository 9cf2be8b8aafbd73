"""Small programs the end-to-end tests run inside namespaces (as files, so they are linted)."""
