//! The journal framing (placeholder; being written).
