"""What operators use on top of the incidents topic: the replayable incident log and the alert bridge."""
