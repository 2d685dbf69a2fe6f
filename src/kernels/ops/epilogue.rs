//! Requantisation epilogues (filled in below).
