"""Layer 1, the base: units, tables, paths and files of record. Imports no other layer."""
