"""Pictures people look at: reasoning maps, run comparisons and training curves over seeds."""
