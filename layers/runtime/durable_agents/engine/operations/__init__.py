"""One module per operation kind; ``DurableContext`` dispatches to them."""
