package processor

// SplitScore is splitScore, for the integration tests' expectations.
var SplitScore = splitScore
