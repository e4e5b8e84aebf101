"""The API's routes for workflows: their bodies, the reads and the live watch they share."""
