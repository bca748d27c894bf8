package api

// Quota is one entity's client quotas (PUT /v1/quotas, and each item of
// GET /v1/quotas), in Kafka's model. The entity is Principal ("User:<name>"
// or "<default>"), ClientID (a client id or "<default>"), or both; a rate
// left out (or 0) is not set, so a less specific entity's applies.
type Quota struct {
	Principal        string  `json:"principal,omitempty"`
	ClientID         string  `json:"client_id,omitempty"`
	ProducerByteRate float64 `json:"producer_byte_rate,omitempty"` // batch bytes appended per second, per broker
	ConsumerByteRate float64 `json:"consumer_byte_rate,omitempty"` // batch bytes fetched per second, per broker
	RequestRate      float64 `json:"request_rate,omitempty"`       // broker requests per second, per broker
}

// QuotaList is the answer of GET /v1/quotas.
type QuotaList struct {
	Quotas []Quota `json:"quotas"`
}
