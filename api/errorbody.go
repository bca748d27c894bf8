package api

// ErrorBody is the JSON envelope of every error response:
// {"error":{"code":"RECORD_TOO_LARGE","message":"...","retriable":false}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody.
type ErrorDetail struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Retriable bool   `json:"retriable"`
}
