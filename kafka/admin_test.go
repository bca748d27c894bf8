package kafka

import (
	"context"

	"github.com/sluice-io/sluice/api"
)

// The admin APIs are answered by the fake with nothing to do: the real
// work is the controller's, tested through a cluster below.
func (f *fakeBackend) CreateTopic(context.Context, api.CreateTopicRequest, bool) error {
	return api.Errorf(api.CodeInvalidRequest, "the fake creates no topics")
}
func (f *fakeBackend) DeleteTopic(context.Context, string) error {
	return api.Errorf(api.CodeInvalidRequest, "the fake deletes no topics")
}
func (f *fakeBackend) AlterTopicConfig(context.Context, string, api.AlterTopicConfigRequest, bool) error {
	return api.Errorf(api.CodeInvalidRequest, "the fake alters no configs")
}
