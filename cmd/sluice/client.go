package main

import (
	"context"
	"errors"
)

func runTopics(ctx context.Context, args []string) error  { return errors.New("not built yet") }
func runProduce(ctx context.Context, args []string) error { return errors.New("not built yet") }
func runConsume(ctx context.Context, args []string) error { return errors.New("not built yet") }
