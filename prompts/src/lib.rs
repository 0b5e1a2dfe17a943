//! Placeholder: filled by its own issue (see ARCHITECTURE.md).
