"""People: the panel's own page for admins to manage who may sign in and with which role."""
