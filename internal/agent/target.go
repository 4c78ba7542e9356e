// SPDX-License-Identifier: Apache-2.0

package agent

import "github.com/swiftlane/swiftlane/internal/strategy"

// RecordingTarget schedules nothing; observe mode resolves strategies into it.
type RecordingTarget = strategy.Recorder

// NewRecordingTarget returns an empty target.
func NewRecordingTarget() *RecordingTarget { return strategy.NewRecorder() }
