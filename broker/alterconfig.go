package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

// alterConfigAttempts bounds how often alterTopicConfig reads the topic
// again after another write to it won the race.
const alterConfigAttempts = 5

// alterTopicConfig applies an alteration to a topic's configs: it rewrites
// the topic's record conditionally on the version it read and on this
// broker still being the controller. Every broker sees the new record
// through its metadata watch and applies it to its open partitions
// (manager.reconcile); gateways read it from their view at each produce.
// Errors: UNKNOWN_TOPIC, those of api.AlterTopicConfigs, NOT_CONTROLLER.
func (ctl *controller) alterTopicConfig(ctx context.Context, name string, req api.AlterTopicConfigRequest) error {
	if err := api.ValidateTopicName(name); err != nil {
		return err
	}
	for range alterConfigAttempts {
		fence, err := ctl.fence()
		if err != nil {
			return err
		}
		data, stat, err := ctl.c.Get(ctx, cluster.TopicPath(name))
		if errors.Is(err, coord.ErrNoNode) {
			return api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", name)
		}
		if err != nil {
			return err
		}
		var rec api.TopicRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			return fmt.Errorf("topic %q: reading its record: %w", name, err)
		}
		configs, err := api.AlterTopicConfigs(rec.Configs, req, len(firstOr(rec.Replicas)))
		if err != nil {
			return err
		}
		if maps.Equal(configs, rec.Configs) {
			return nil
		}
		rec.Configs = configs
		data, _ = json.Marshal(rec)
		_, err = ctl.c.Multi(ctx, fence, coord.SetOp(cluster.TopicPath(name), data, stat.Version))
		switch {
		case errors.Is(err, coord.ErrBadVersion):
			continue // the topic's record or the controller epoch moved: look again
		case errors.Is(err, coord.ErrNoNode):
			return api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", name)
		case err != nil:
			return err
		}
		ctl.log.Info("altered topic configs", "topic", name, "configs", configs)
		return ctl.view.Refresh(ctx)
	}
	return api.Errorf(api.CodeNotController, "broker %d: the topic %q or the controller changed %d times while altering its configs", ctl.self, name, alterConfigAttempts)
}
