//! The replacement machine (placeholder; being written).
