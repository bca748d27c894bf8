// Package api is the vocabulary the gateway, the brokers and the clients
// share: the wire types, the error table (stable code, HTTP status,
// retriable), header names, the limits table, topic configs, codec names,
// cursors and the key partitioner. The record-batch codec is package
// recordbatch.
package api
