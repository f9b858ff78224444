//! The lifecycle machine (being written).
