package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleDescribeCluster answers DescribeCluster: the brokers that serve
// Kafka and the controller, as Metadata names them. Sluice has no cluster
// id, so it is empty. Only the brokers' endpoint is served (v1's endpoint
// type 1); asking for controllers is UNSUPPORTED_ENDPOINT_TYPE, as a Kafka
// broker answers it.
func (s *Server) handleDescribeCluster(_ context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeClusterRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.EndpointType = req.EndpointType
	if req.Version >= 1 && req.EndpointType != 1 {
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		resp.ErrorMessage = kmsg.StringPtr("only the brokers' endpoint (type 1) is served")
		return resp, nil
	}
	md := s.opts.Backend.Metadata()
	brokers := metadataBrokers(md)
	for _, b := range brokers {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port = b.id, b.host, b.port
		resp.Brokers = append(resp.Brokers, rb)
	}
	resp.ControllerID = controllerID(md, brokers)
	return resp, nil
}
