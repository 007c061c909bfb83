"""Side effects: the built-in activities the workflows call by name."""
