"""The alarms of template.yaml: every dead-letter queue, runs waiting for a person, failures.

The queues are enumerated from the template, so a dead-letter queue added without an alarm
fails here. The DurableAgents alarms must select exactly what the functions emit: the metric
names the code writes, the namespace and the ``service`` dimension the Globals configure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.template.template_yaml import props

ROOT = Path(__file__).resolve().parents[2]
NOTIFIES = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}


def _alarms(resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: resource["Properties"]
        for name, resource in resources.items()
        if resource["Type"] == "AWS::CloudWatch::Alarm"
    }


def _dimension(alarm: dict[str, Any], name: str) -> Any:
    (value,) = [d["Value"] for d in alarm.get("Dimensions", []) if d["Name"] == name]
    return value


def test_every_queue_in_the_template_has_an_alarm_on_its_visible_messages(
    resources: dict[str, Any],
) -> None:
    queues = [n for n, r in resources.items() if r["Type"] == "AWS::SQS::Queue"]
    assert {"StepRunnerDeadLetterQueue", "RelayDeadLetterQueue"} <= set(queues)
    watched = {
        _dimension(alarm, "QueueName")["Fn::GetAtt"][0]
        for alarm in _alarms(resources).values()
        if alarm["Namespace"] == "AWS/SQS"
        and alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
        and alarm["Threshold"] == 0
        and alarm["ComparisonOperator"] == "GreaterThanThreshold"
    }
    assert set(queues) <= watched, f"queues without an alarm: {set(queues) - watched}"


def test_every_alarm_notifies_the_alarm_topic_when_one_is_given(
    resources: dict[str, Any], template: dict[str, Any]
) -> None:
    assert template["Parameters"]["AlarmTopicArn"]["Default"] == ""
    assert template["Conditions"]["HasAlarmTopic"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]
    }
    for name, alarm in _alarms(resources).items():
        assert alarm.get("AlarmActions") == NOTIFIES, name
        assert alarm.get("TreatMissingData") == "notBreaching", name  # no data: nothing wrong


@pytest.mark.parametrize(
    ("alarm", "metric", "emitted_by"),
    [
        ("RunsPausedAlarm", "RunsPaused", "functions/reconciler/app.py"),
        ("ReviewsPendingAlarm", "ReviewsPending", "functions/reconciler/app.py"),
        ("ReconcilerUnitErrorsAlarm", "SweepUnitErrors", "functions/reconciler/app.py"),
    ],
)
def test_the_runtime_alarms_select_what_the_functions_emit(
    resources: dict[str, Any], template: dict[str, Any], alarm: str, metric: str, emitted_by: str
) -> None:
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    watched = props(resources, alarm)
    assert watched["MetricName"] == metric
    assert f'"{metric}"' in (ROOT / emitted_by).read_text(encoding="utf-8")
    assert watched["Namespace"] == env["POWERTOOLS_METRICS_NAMESPACE"]
    assert _dimension(watched, "service") == env["POWERTOOLS_SERVICE_NAME"]


@pytest.mark.parametrize(
    ("alarm", "function", "metric"),
    [
        ("ReconcilerErrorsAlarm", "ReconcilerFunction", "Errors"),
        ("StepRunnerErrorsAlarm", "StepRunnerFunction", "Errors"),
        ("StepRunnerThrottlesAlarm", "StepRunnerFunction", "Throttles"),
    ],
)
def test_the_function_alarms_watch_their_function(
    resources: dict[str, Any], alarm: str, function: str, metric: str
) -> None:
    watched = props(resources, alarm)
    assert (watched["Namespace"], watched["MetricName"]) == ("AWS/Lambda", metric)
    assert _dimension(watched, "FunctionName") == {"Ref": function}
