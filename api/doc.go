// Package api is the vocabulary the gateway, the brokers and the clients
// share: the wire types, the error table (stable code, HTTP status,
// retriable), header names, the limits table, topic configs, codec names,
// cursors and the key partitioner. It imports the standard library only, and
// not net/http, so that the log and the coordinator link no HTTP stack: the
// record-batch codec is package recordbatch, and writing and reading the
// error envelope over HTTP is package api/apihttp.
package api
