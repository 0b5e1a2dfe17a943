-- causeway trace store, schema version 12: which Python frame each C-level call of the
-- interpreter's eval loop entered, so that readers place a stack's Python frames among its native
-- ones (at its `_PyEval_EvalFrameDefault` frames). NULL in stacks recorded before it. Applied on
-- top of 001-011 to every new file (schema.rs).

ALTER TABLE python_frames ADD COLUMN IF NOT EXISTS entry BOOLEAN;
