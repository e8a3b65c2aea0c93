"""Taking over from the old crawler service: reading its status export and importing its progress as watermarks."""
