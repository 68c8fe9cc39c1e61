"""Pages that take the right side's whole place: two trials compared, one replayed. Unlike a
panel (studio/views), a page may put several panels together."""
