"""The log formats ``meshtune calibrate`` reads: one parser module per format (nccl-tests /
rccl-tests, OSU micro-benchmarks, the MeshSlice artifact, canonical CSV / JSONL, GeMM tables,
result tables), each exporting a ``PARSER`` registered by format in
:data:`~meshtune.calibrate.formats.detect.PARSERS`, which detects a file's format from its
content and reads files and folders; the modules they share say what a parser returns
(:mod:`~meshtune.calibrate.formats.records`), how lines, units, op names, tables and per-file
options are read."""
